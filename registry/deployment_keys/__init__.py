"""The registry's keys, as every process of a deployment must hold them: the registry publishes
their fingerprints as it starts, and each worker and housekeeper compares its own with them before
it starts (it seals audit events with the secret, and signs with the attestation keys)."""
