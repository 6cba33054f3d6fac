"""Single sign-on through the company's OpenID Connect provider: the dashboard's sign-in
(authorization code with PKCE) and `loraplane login` (the same flow, handed to the CLI through a
loopback redirect). A sign-on ends in a loraplane token of the person's identity, keyed by the
provider's issuer and subject: every request after it is authenticated as any token is."""
