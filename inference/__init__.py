"""Answering raw texts with an export, apart from training: the LiteRT fast path's runtime and its
file layout, the SavedModel's text signature, batch jobs over lines of files (locally and on
Beam), and streaming in input order. Nothing here trains or imports `engine`."""
