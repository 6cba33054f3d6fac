"""Each pool's active set: what may serve, versioned by a generation that nodes long-poll.

- signed_set.py: what a pool serves, signed by the registry; every part starts from it.
- writing/: a change (change.py), its operations (changes.py), its placement (placing.py), and
  the announcement of its generation.
- reading/: the set as nodes, routers and the dashboard read it (snapshot.py).
- placement/: where versions live on the nodes, as read, and the routers' traffic reports.
- long_poll/: the endpoint nodes long-poll, its fast path, and the state the app owns for it.
- repository.py: their SQL.
"""
