"""Routernet's routing core: an AMQP 1.0 router driving Proton's C engine directly."""

__version__ = "0.1.0"
