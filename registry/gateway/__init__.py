"""The cluster's inference gateway (GIE, the llm-d router) beside loraplane: its InferencePool,
InferenceModelRewrite and InferenceObjective objects, built from the pools' active sets
(objects.py, service.py). workers/gateway_sync.py keeps them in step on a cluster;
`loraplane k8s render` prints them. docs/gateway.md."""
