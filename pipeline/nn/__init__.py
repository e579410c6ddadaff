"""The tabular network: encoding, module, a device-resident training loop, and DDP across devices."""
