"""Neural modules: the shared encoder, the decoder families and the LightningModule."""
