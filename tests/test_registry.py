"""The plugin registry: built-ins through the hooks, third-party plugins by name."""

import numpy as np
import pytest

import hierdp
from hierdp.errors import PluginError
from hierdp.mechanisms.base import Mechanism
from hierdp.plugins import DEFAULT_PLUGINS, get_plugin_manager, hookimpl
from hierdp.registry import Registry, use_plugin_manager


class ZeroNoise(Mechanism):
    """A (non-private!) test mechanism that adds nothing, to check name-based lookup."""

    name = "zero_noise_test"
    integer = True

    def variance(self, budget, sensitivity):
        return 1.0

    def sample(self, values, budget, sensitivity, rng):
        return np.asarray(values).copy()


class ThirdParty:
    @hookimpl
    def hierdp_register_mechanisms(self):
        return [ZeroNoise]


def test_builtins_come_through_the_hooks():
    pm = get_plugin_manager(load_entrypoints=False)
    assert [name for name, _ in pm.list_name_plugin()][: len(DEFAULT_PLUGINS)] == list(DEFAULT_PLUGINS)
    reg = Registry(pm)
    assert "discrete_laplace" in reg.names("mechanism")
    assert reg.provider("mechanism", "discrete_laplace") == "hierdp.mechanisms"
    assert "blue" in reg.names("postprocessor") and {"equal", "leaves"} <= set(reg.names("budget"))


def test_third_party_mechanism_used_by_name():
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(ThirdParty(), name="thirdparty")
    with use_plugin_manager(pm):
        assert "zero_noise_test" in hierdp.registry.names("mechanism")
        tree = hierdp.Tree.complete(2, 3)
        x = tree.aggregate(np.arange(4))
        r = hierdp.release(tree, x, epsilon=1.0, mechanism="zero_noise_test", seed=0)
        np.testing.assert_allclose(r.values, x, atol=1e-9)
        assert r.ledger.mechanism == "zero_noise_test"
    assert "zero_noise_test" not in hierdp.registry.names("mechanism")


def test_duplicate_names_are_refused_naming_both():
    class Dup:
        @hookimpl
        def hierdp_register_mechanisms(self):
            from hierdp.mechanisms import DiscreteLaplace

            return [DiscreteLaplace]

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Dup(), name="dup-plugin")
    with pytest.raises(PluginError, match="'discrete_laplace' is provided twice, by 'hierdp.mechanisms' and by 'dup-plugin'"):
        Registry(pm).names("mechanism")


def test_unknown_kind_and_name():
    with pytest.raises(PluginError, match="unknown plugin kind 'mechanisn'.*did you mean 'mechanism'"):
        hierdp.registry.names("mechanisn")
    with pytest.raises(PluginError, match="expected one of .*'blue'"):
        hierdp.registry.get("postprocessor", "nope")


def test_bad_parameters_are_a_plugin_error():
    with pytest.raises(PluginError, match="bad parameters for mechanism 'discrete_laplace'"):
        hierdp.registry.create("mechanism", "discrete_laplace", scale=3)


def test_autoload_can_be_disabled(monkeypatch):
    calls = []
    monkeypatch.setenv("HIERDP_DISABLE_PLUGIN_AUTOLOAD", "1")
    import pluggy

    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints",
                        lambda self, group, name=None: calls.append(group) or 0)
    get_plugin_manager()
    assert calls == []
    monkeypatch.delenv("HIERDP_DISABLE_PLUGIN_AUTOLOAD")
    get_plugin_manager()
    assert calls == ["hierdp"]
