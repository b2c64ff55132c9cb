"""kbuild.cache: the content-addressed artefact store.

Owns the store interface, its tiers (local diskcache, HTTP, Redis), the lock file, bundles
and statistics. It stores bytes and metadata under keys and never imports triton or torch.
"""
