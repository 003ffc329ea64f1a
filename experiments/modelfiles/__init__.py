"""Model files: everything written or read that holds weights. `checkpoints.py` (atomic, sha256
beside each, loaded tensors-only, averaged), `export.py` (safetensors + config.json + tokenizer),
`loading.py` (a trained model from a run, checkpoint or export; what identifies its weights),
`ct2.py` (the CTranslate2 export and decoder), `quantize.py` (dynamic int8 linear layers),
`engines.py` (decoding engines: `packed.py` pre-packed linear layers, `aoti.py` AOTInductor steps
compiled in the process, never loaded from disk). May
import: data/, files.py."""
