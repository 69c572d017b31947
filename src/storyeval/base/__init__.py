"""The foundations every part of storyeval builds on, and nothing else: the one error and
warning base (:mod:`~storyeval.base.errors`), argument checks written once
(:mod:`~storyeval.base.validation`), the signature every number carries
(:mod:`~storyeval.base.signature`), atomic files (:mod:`~storyeval.base.io`), the one YAML
loader (:mod:`~storyeval.base.yamlfile`), the one plug-in registry
(:mod:`~storyeval.base.registry`), the one table writer (:mod:`~storyeval.base.markdown`),
figures (:mod:`~storyeval.base.plots`), shared statistics (:mod:`~storyeval.base.stats`) and
optional dependencies (:mod:`~storyeval.base.extras`).

Importing it is light: no module here imports another part of storyeval.
"""
