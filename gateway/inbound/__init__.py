"""The one path every inbound message takes: the pipeline, admission, pairing, commands, attachments, uploads."""
