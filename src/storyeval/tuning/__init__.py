"""Training story generators: ENGEN's entity-aware language model (Clark, Ji & Smith 2018),
maximum-likelihood fine-tuning and self-critical training on a reward (Rennie et al. 2017) of
any metric or judge.

The learned *metrics* (UNION, NSP heads, NUBIA, the preference model) are in
:mod:`storyeval.learn`; both use its training loop and checkpoint metadata
(:mod:`storyeval.learn.trainer`). Heavy libraries are imported inside the functions that need
them.
"""
