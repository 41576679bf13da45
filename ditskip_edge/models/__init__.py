"""Model layer: specs of the supported DiTs, one view (embed -> blocks -> head) over each, text and autoencoders;
tiny_tokenizers.py trains tiny tokenizers of the real text encoders' styles (fixtures that tests and tiny model
folders build on)."""
