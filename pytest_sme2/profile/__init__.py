"""What runs mean: the Profile and the one statistics module."""
