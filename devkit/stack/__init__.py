"""`loraplane up`: the local stack, its processes and the demo it seeds."""
