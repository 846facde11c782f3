"""What runs on the GPU host: stdlib only, Python 3.8+.

Shipped to the host as a zipapp (see ``backend.agent.bundle``); the client imports the same modules
(for example the safetensors header parser) so one implementation serves both sides. Keep every module
here importable on Python 3.8 with nothing but the standard library.
"""
