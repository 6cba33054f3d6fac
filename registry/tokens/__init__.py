"""Token administration: issuing, listing and revoking API tokens, each audited. It sits above
auth, which every package uses to read the caller's token, so auth needs none of audit, pools or
the active set."""
