"""Public agent transcripts compacted by the product (issue 36): ``python -m
benchmarks.real_transcripts`` (``run.py``); the corpus and its facts in ``corpus.py``; how
the committed corpus was built in ``build.py``."""
