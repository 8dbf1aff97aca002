"""Policies: the TransformerGNN and the per-UAV choice distribution it defines."""

from uavgnn.models.transformer_gnn import TransformerGNN, model_from_config

__all__ = ["TransformerGNN", "model_from_config"]
