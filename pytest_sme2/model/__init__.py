"""The models: names to modules, the onboarding interface."""
