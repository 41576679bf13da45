"""Model layer: specs of the supported DiTs, one view (embed -> blocks -> head) over each, text and autoencoders."""
