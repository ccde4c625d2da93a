"""Models and data for rgpu's training tests, demo and benchmarks: gpt (a
character-level GPT), cnn (a small ResNet with batch norm), data (a generated
character corpus and synthetic images). Import with <repo>/tools on sys.path:
`from models import gpt`."""
