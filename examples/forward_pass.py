"""One forward pass of a small graph Transformer on a batch of three samples."""

import torch

from graphformer import GraphPool, make_model
from graphformer.graphs import make_batch

torch.manual_seed(0)
batch = make_batch(GraphPool(), src=[[4, 5, 6, 7], [8, 9], [10]], tgt=[[5, 6], [7, 8, 9], []])
model = make_model(src_vocab=16, layers=2, d_model=32, heads=4, d_ff=64)
print(batch.graph)
print("log-probabilities:", tuple(model(batch).shape))
