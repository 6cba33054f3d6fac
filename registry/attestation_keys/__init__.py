"""The attestation keys: the keyring that signs (attestations, active sets, trust bundles) and
the trust bundle that publishes them. Below both the attestations and the active set, which sign
with it."""
