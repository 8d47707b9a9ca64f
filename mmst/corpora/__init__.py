"""Building corpora: MuST-C layout reading and cross-pair alignment, the synthetic grammar corpus,
audio lists, the multi-way builder (features, manifests, vocabularies) and the ASR view.

The runtime side (manifests, feature store, vocabularies, dataset, batching) is :mod:`mmst.data`.
"""
