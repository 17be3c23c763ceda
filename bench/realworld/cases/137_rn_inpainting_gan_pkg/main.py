# Thread: https://github.com/geekyutao/RN/pull/19
# Title: "moved discriminator's backward position"
# Diagnosis from the thread: training the Region Normalization inpainting GAN raised "one of the variables needed
# for gradient computation has been modified by an inplace operation" (the reporter's screenshot). train() ran the
# discriminator on the real image, on the detached prediction and on the prediction for the generator's
# adversarial loss, built both losses, and only then did "Backward D" (d_loss.backward(), dis_optimizer.step())
# followed by "Backward G": the D step rewrote the discriminator weights that g_fake's graph had saved. The PR
# (merged) moves the D backward/step block up, before the discriminator is run for the generator's loss.
# Kept: the package split (networks / models / training script), G_Net with region normalization over the
# masked and known regions, D_Net returning (score, features), AdversarialLoss ('nsgan', BCE), InpaintingModel
# holding both Adam optimisers, the train() body (merged result, D losses on gt and detached prediction, G
# adversarial + masked L1 losses, the two backward blocks in the original order).
# Added: tiny nets, random 16x16 images and a square hole mask, two iterations.
import torch

from .models import InpaintingModel

torch.manual_seed(0)


def train(model, batches):
    model.train()
    for gt, mask in batches:
        prediction = model.generator(gt, mask)
        merged_result = prediction * mask + gt * (1 - mask)

        g_loss, d_loss = 0, 0
        d_real, _ = model.discriminator(gt)
        d_fake, _ = model.discriminator(prediction.detach())
        d_real_loss = model.adversarial_loss(d_real, True, True)
        d_fake_loss = model.adversarial_loss(d_fake, False, True)
        d_loss = d_loss + (d_real_loss + d_fake_loss) / 2

        g_fake, _ = model.discriminator(prediction)
        g_gan_loss = model.adversarial_loss(g_fake, True, False)
        g_loss = g_loss + model.gan_weight * g_gan_loss
        g_l1_loss = model.l1_loss(gt, merged_result) / torch.mean(mask)
        g_loss = g_loss + model.l1_weight * g_l1_loss

        # Backward D
        d_loss.backward()
        model.dis_optimizer.step()
        model.dis_optimizer.zero_grad()

        # Backward G
        g_loss.backward()
        model.gen_optimizer.step()
        model.gen_optimizer.zero_grad()


def main():
    model = InpaintingModel(g_lr=1e-4, d_lr=1e-5, l1_weight=1.0, gan_weight=0.1)
    mask = torch.zeros(2, 1, 16, 16)
    mask[:, :, 4:12, 4:12] = 1.0
    batches = [(torch.rand(2, 3, 16, 16), mask) for _ in range(2)]
    train(model, batches)


if __name__ == "__main__":
    main()
