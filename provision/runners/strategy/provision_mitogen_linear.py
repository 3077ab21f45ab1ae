"""Mitogen's linear strategy (ansible_mitogen/plugins/strategy/mitogen_linear.py) as provision runs it: warmed before the
play's workers fork (provision.runners.mitogen_warm)."""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

from provision.runners.mitogen_warm import Warm

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(Warm, ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    pass
