"""gpu-catalog: certified bundles of GPU-cluster software.

One import root holds the project's packages (``gpucatalog.catalog``, ``gpucatalog.validators``,
``gpucatalog.pipelines``, ``gpucatalog.gpuhealth``, ``gpucatalog.toolchain``) so that installing
gpu-catalog never shadows or is shadowed by PyPI packages with the same short names
(``validators`` is a popular one).
"""
