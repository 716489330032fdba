"""sglpatch: maintain a quilt-style patch series on top of a pinned SGLang release."""
