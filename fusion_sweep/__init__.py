"""fusion-sweep: does the way positional encodings are fused with token embeddings matter?"""
__version__ = "0.1.0"
