"""Pretraining data: raw documents -> the original's masked-LM + next-sentence TFRecords, on one
machine (`create_pretraining_data`, streaming and parallel) or on Apache Beam (`beam_pipeline`),
and the tf.data input that reads them back (`dataset`, `dynamic_masking`)."""
