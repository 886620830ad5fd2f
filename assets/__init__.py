"""The code location's assets: stream SQL files live in ``assets/streams/``."""
