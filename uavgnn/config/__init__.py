"""The configuration: the config groups' typed schemas (``schemas``), the value checks their types cannot
express (``validation``) and the typed settings built from them once for the layers below the plug-ins
(``settings``), which never see the Hydra config."""

from uavgnn.config.schemas import register_configs

__all__ = ["register_configs"]
