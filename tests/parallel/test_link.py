"""Link prediction on every algorithm: the embeddings, the parameter gradients and the loss of one training step
equal the serial step's (float64, 1e-5), and the bytes moved equal the encoder's byte model (without a
node-classification loss) plus the decoder's row fetch (:meth:`gridgnn.parallel.pairs.RowDirectory.volume`)."""
from ._fidelity import check_bytes, check_each


def test_link_prediction_equals_serial(dist_results):
    from ._fidelity import check_against_serial

    if dist_results[0] == 1:
        return
    check_each(dist_results, "link-", check_against_serial)


def test_link_prediction_bytes_equal_the_model(dist_results):
    if dist_results[0] == 1:
        return
    check_each(dist_results, "link-", check_bytes)
