"""An image CNN of your own, for a dataset whose features include images with an image_size.

    shardflow train --data out/shapes --model-dir model/shapes-cnn \\
        --model-module examples/shapes/model.py

Each image input arrives decoded, resized and scaled to [0, 1] (the host preprocessing did it):
a float32 [batch, height, width, channels]. This model stacks two convolution blocks with batch
normalization per image, pools them, and classifies; other inputs are left out. It comes back
compiled (its own optimizer and loss), so shardflow keeps it as it is.
"""


def build_model(spec):
    keras = spec.keras
    layers = keras.layers
    images = {n: x for n, x in spec.inputs.items() if spec.features[n].kind == "image"}
    if not images:
        raise ValueError("this model needs an image feature with an image_size")
    pooled = []
    for name, x in images.items():
        for filters in (16, 32):
            x = layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = layers.BatchNormalization()(x)
            x = layers.ReLU()(x)
            x = layers.MaxPooling2D()(x)
        pooled.append(layers.GlobalAveragePooling2D(name=f"{name}_pool")(x))
    x = pooled[0] if len(pooled) == 1 else layers.Concatenate()(pooled)
    if spec.label.task != "classification":
        raise ValueError("this model is a classifier")
    outputs = layers.Dense(spec.label.units, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs=images, outputs=outputs, name="shapes_cnn")
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model
