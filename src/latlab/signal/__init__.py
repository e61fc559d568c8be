"""Black-box measurement with test audio: time codes (``timecode``), WAV input and output."""
