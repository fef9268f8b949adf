"""The catalog: data model, loading with schemas, resolution, values, rendering and install."""
