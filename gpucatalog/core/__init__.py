"""The ground every other package stands on: the one exception tree (``errors``), the one way to
run an external program (``executor``), the Kubernetes API client (``kubeapi``) and YAML documents
that remember their lines (``yamlfile``). Imports nothing of gpu-catalog."""
