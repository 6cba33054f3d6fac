"""The review dashboard, rendered from the registry's services.

Empty for now.
"""
