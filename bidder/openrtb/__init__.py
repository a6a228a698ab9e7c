"""The OpenRTB request: reading the body, the typed decoder, the view the stages use,
and TCF consent strings."""
