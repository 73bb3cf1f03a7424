"""Matrix-based minibatch sampling (MLSys'24): GraphSAGE and LADIES as sparse products, many minibatches at once."""
from .matrix import SAMPLERS, BulkSample, layer_probabilities, minibatches, sample_bulk

__all__ = ["SAMPLERS", "BulkSample", "layer_probabilities", "minibatches", "sample_bulk"]
