"""What the sweep measures of a pattern's graphs, not of its training: edges per query and reach
(see sweep.py's docstring), on one sample of the length or on the test split's own graphs."""

from __future__ import annotations

from pathlib import Path


def classifier_pool(spec: str, pooling: str):
    """The graph pool of an encoder classifier with this encoder pattern and pooling."""
    from graphformer.model.config import ModelConfig

    return ModelConfig(src_vocab=1, tgt_vocab=1, model="encoder", enc_attention=spec, pooling=pooling).graph_pool()


def sample_graphs(spec: str, length: int, pooling: str, data: Path | None, limit: int | None = None) -> list:
    """Encoder graphs to measure: one sample of the length, or for a pattern with each sample's
    own edges, those of the test split's samples (the first ``limit``)."""
    from graphformer.data.corpus import read_split
    from graphformer.graphs.pool import ENC
    from graphformer.graphs.sample_edges import split_edges

    pool = classifier_pool(spec, pooling)
    if not pool.sample_terms:
        return [(pool.graph(pool.source_positions(length), 0), length)]  # the tokens, </s> (and <cls>)
    test = read_split(data, "test")
    edges = split_edges(pool, data, "test", test.src_words, test.tgt_words)
    count = min(len(test), limit or len(test))
    lengths = [len(test.src_words[i]) for i in range(count)]
    return [
        (pool.with_sample_edges(pool.source_positions(n), 0, {ENC: edges[i][ENC]}, i), n) for i, n in enumerate(lengths)
    ]


def edges_per_query(spec: str, length: int, pooling: str, data: Path | None = None) -> float:
    from graphformer.graphs.pool import ENC

    graphs = [graph for graph, _ in sample_graphs(spec, length, pooling, data)]
    return sum(g.num_edges(ENC) for g in graphs) / sum(g.num_nodes("src") for g in graphs)


def reach(spec: str, length: int, pooling: str, run: Path, data: Path | None = None) -> float:
    """Share of the context that can meet the last token (recall's query) within the run's layers
    in one node: any node for mean pooling, the node the label is read from for the others
    (`graphformer.graphs.reach`); for a pattern with each sample's own edges, the mean over the
    first 20 test samples."""
    from graphformer.graphs.reach import meeting_share, readout_node
    from graphformer.training.run_dir import RunDir

    model, _ = RunDir(run).read_config()
    layers = model["max_depth"] if model["model"] == "universal-encoder" else model["layers"]
    pool = classifier_pool(spec, pooling)
    shares = [
        meeting_share(pool, n, layers, readout_node(pool, n, pooling), graph)
        for graph, n in sample_graphs(spec, length, pooling, data, limit=20)
    ]
    return sum(shares) / len(shares)


def accuracy_bound(task: str, share: float) -> float | None:
    """Recall: the best accuracy a model can reach when only ``share`` of the values can meet the
    query (elsewhere it guesses among the values); None for other tasks."""
    from graphformer.data import recall

    return share + (1 - share) / recall.DEFAULT_NUM_VALUES if task == "recall" else None
