"""Pinned upstream tools (helm, kubectl, kube-apiserver, etcd, kwok …) built and cached by version."""
