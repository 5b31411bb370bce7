"""tuner.modeling.laws."""
