"""loraplane: a control plane for serving many LoRA adapters on one shared base model with vLLM."""
