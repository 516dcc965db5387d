"""Files perfgate puts on an SGLang server's ``PYTHONPATH``; see ``_perfgate_autotune_hook``.

The server imports them as top-level modules, not through this package.
"""
