"""The catalog: data model, loading with schemas, resolution, rendering, install and the CLI."""
