"""SGLang itself as specdeck knows it: its launch flags per release and the releases it speaks."""
