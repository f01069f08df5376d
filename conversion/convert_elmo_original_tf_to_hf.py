"""Convert the original (bilm-tf) ELMo files to a Hugging Face checkpoint; the same as `elmo-hf convert`.

    python conversion/convert_elmo_original_tf_to_hf.py --options options.json --weights weights.hdf5 \
        --output-dir elmo-original [--push-to-hub org/elmo-original [--private] [--revision BRANCH]]

    python conversion/convert_elmo_original_tf_to_hf.py --tf-checkpoint model.ckpt-60 --options options.json \
        --vocab vocab.txt --output-dir elmo-lm

The converter (key table, readers, the NumPy check of bilm-tf's arithmetic) is `elmo_hf/convert/convert_bilm_tf.py`.
"""

from elmo_hf.cli import CONVERT_DESCRIPTION, script_main


def main(argv=None):
    script_main("convert", CONVERT_DESCRIPTION, argv)


if __name__ == "__main__":
    main()
