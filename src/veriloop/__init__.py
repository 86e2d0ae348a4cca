"""veriloop: train and evaluate reasoning language models with verifiable rewards."""

__version__ = "0.1.0"
