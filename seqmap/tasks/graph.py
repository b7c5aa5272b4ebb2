"""Node classification on one graph (a GAT): the whole graph is one batch, scored on a split's nodes; one
training step is one epoch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from seqmap.config import DataConfig
from seqmap.data.corpus import DataError
from seqmap.data.graphs import GraphData, load_planetoid
from seqmap.tasks.base import Task, TrainingContext
from seqmap.training.validate import evaluating, graph_metrics, log_label_scores


def load_graph(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> GraphData:
    """``data.train``: a graph .npz (or cora, citeseer: data/planetoid/NAME.npz), row-normalised, self-loops added."""
    g = load_planetoid(cfg.train)
    log(f"graph {g.name}: {g.num_nodes} nodes, {g.num_edges} edges (self-loops included), {g.num_features} "
        f"features, {g.num_classes} classes; train / val / test nodes {g.train_idx.numel()} / "
        f"{g.val_idx.numel()} / {g.test_idx.numel()}")
    if g.val_idx.numel() == 0:
        raise DataError(f"{cfg.train}: val_idx is empty; list the validation nodes (validation picks the checkpoint)")
    return GraphData(g)


class GraphTask(Task):
    name = "graph"

    def load(self, cfg, run_dir, log=print):
        return load_graph(cfg, run_dir, log)

    def model_fields(self, data: GraphData) -> dict:
        return dict(n_features=data.graph.num_features, n_classes=data.graph.num_classes)  # no tokens

    def batches(self, ctx: TrainingContext):
        """The whole graph, scored on the training nodes, once per epoch (one step = one epoch)."""
        max_epochs, batch = ctx.cfg.train.max_epochs, ctx.data.batch(ctx.data.graph.train_idx,
                                                                     ctx.cfg.model.graph_attention)
        while max_epochs <= 0 or ctx.state["data"]["epoch"] < max_epochs:
            ctx.state["data"] = {"epoch": ctx.state["data"]["epoch"] + 1, "batch": 0}
            ctx.state["epoch"] = ctx.state["data"]["epoch"]
            yield batch

    def validate(self, model, data: GraphData, cfg, device, log):
        """loss, accuracy and macro-F1 of one forward pass over the graph, on its val_idx nodes."""
        with evaluating(model):
            out = graph_metrics(model, data, data.graph.val_idx, cfg.model.graph_attention, device)
            del out["logits"]
            log_label_scores(out, log)
        return out

    def test(self, trainer):
        """Loss, accuracy and macro-F1 of the best checkpoint on the graph's test nodes (None when it has none)."""
        data, log = trainer.data, trainer.log
        if data.graph.test_idx.numel() == 0:
            return None
        best = trainer.load_best()
        result = graph_metrics(trainer.model.eval(), data, data.graph.test_idx, trainer.cfg.model.graph_attention,
                               trainer.device)
        del result["logits"]
        log.metrics("test", trainer.state["step"], **result)
        log.info(f"test ({result['examples']} nodes, {best.name}): accuracy {result['accuracy']:.2f} macro-F1 "
                 f"{result['macro_f1']:.2f} loss {result['loss']:.4f}")
        return result


TASK = GraphTask()
