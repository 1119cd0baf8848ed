"""ssrkit.store."""
