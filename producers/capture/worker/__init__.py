"""Capture worker: turns stored captures into extracted products through source
adapters (``adapters/``), keeping every fetched response in a raw envelope (``raw``)."""
