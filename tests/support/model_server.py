"""The scripted model server, from the product's devstack (``devstack/model_server.py``),
under the name the tests import."""

from devstack.model_server import Script, model_server

__all__ = ["Script", "model_server"]
