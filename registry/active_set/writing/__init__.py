"""The write model: a change to a pool's active set, from its generation bump to its signed set,
its alias rows, its placement on the nodes (placing.py) and its announcement."""
