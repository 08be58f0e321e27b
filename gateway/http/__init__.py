"""The daemon's HTTP side: the aiohttp server, the API, the event fan-out and its relay across replicas."""
