"""Kubernetes node identity: a node agent presents its pod's projected service-account token
instead of a node token, and the registry makes it the principal of one node (the pod's name) of
the pool its service account is mapped to (LORAPLANE_K8S_* settings)."""
