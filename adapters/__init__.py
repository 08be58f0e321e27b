"""Platform adapters, one package each; each is the only place its platform's SDK is imported."""
