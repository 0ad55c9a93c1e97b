"""Convolutional and vision models for the zoo, in plain torch (no torchvision): the
architectures follow torchvision's ResNet/Inception-v3, Cadene's SENet-154 and the original
U-Net (with padded convolutions and batch norm), layer for layer, so parameter counts and
activation shapes match the published models."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
import torch.nn.functional as F

from ._text import _attention


# -- ResNet (He et al. 2016; torchvision layout, bottleneck stride on the 3x3) ----------------
class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, width=None,
                 se_reduction=0, first_kernel=1) -> None:
        super().__init__()
        width = width or planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, planes * self.expansion if groups > 1 else width, 3,
                               stride, 1, groups=groups, bias=False)
        c2 = self.conv2.out_channels
        self.bn2 = nn.BatchNorm2d(c2)
        self.conv3 = nn.Conv2d(c2, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.se = _SE(planes * self.expansion, se_reduction) if se_reduction else None

    def forward(self, x) -> torch.Tensor:
        idt = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.se is not None:
            out = self.se(out)
        if self.downsample is not None:
            idt = self.downsample(x)
        out = out + idt
        return self.relu(out)


class _SE(nn.Module):
    """Squeeze-and-excitation (Hu et al. 2018) as in SENet-154: 1x1 convs on pooled maps."""

    def __init__(self, channels, reduction) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s), inplace=True)))
        return x * s


class ResNet(nn.Module):
    def __init__(self, layers, num_classes=1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(64, layers[0])
        self.layer2 = self._layer(128, layers[1], 2)
        self.layer3 = self._layer(256, layers[2], 2)
        self.layer4 = self._layer(512, layers[3], 2)
        self.fc = nn.Linear(512 * 4, num_classes)

    def _layer(self, planes, blocks, stride=1):
        down = None
        if stride != 1 or self.inplanes != planes * 4:
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes * 4))
        mods = [_Bottleneck(self.inplanes, planes, stride, down)]
        self.inplanes = planes * 4
        mods += [_Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- SENet-154 (Hu et al. 2018; Cadene's pretrainedmodels layout) --------------------------------
class SENet154(nn.Module):
    def __init__(self, layers=(3, 8, 36, 3), groups=64, reduction=16, num_classes=1000) -> None:
        super().__init__()
        def cbr(i, o, s=1):
            return [nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]
        self.layer0 = nn.Sequential(*cbr(3, 64, 2), *cbr(64, 64), *cbr(64, 128),
                                    nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inplanes = 128
        self.layer1 = self._layer(64, layers[0], groups, reduction)
        self.layer2 = self._layer(128, layers[1], groups, reduction, 2)
        self.layer3 = self._layer(256, layers[2], groups, reduction, 2)
        self.layer4 = self._layer(512, layers[3], groups, reduction, 2)
        self.dropout = nn.Dropout(0.2)
        self.last_linear = nn.Linear(512 * 4, num_classes)

    def _layer(self, planes, blocks, groups, reduction, stride=1):
        down = None
        if stride != 1 or self.inplanes != planes * 4:
            # SENet-154 downsamples with a 3x3 convolution (downsample_kernel_size=3)
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 3, stride, 1, bias=False),
                                 nn.BatchNorm2d(planes * 4))
        mk = lambda i, s, d: _Bottleneck(i, planes, s, d, groups=groups, width=planes * 2,
                                          se_reduction=reduction)
        mods = [mk(self.inplanes, stride, down)]
        self.inplanes = planes * 4
        mods += [mk(self.inplanes, 1, None) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x) -> torch.Tensor:
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.layer0(x)))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.last_linear(self.dropout(x))


# -- Inception-v3 (Szegedy et al. 2016; torchvision layout, aux head in training) --------------
class _C(nn.Module):
    def __init__(self, i, o, k, s=1, p=0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(i, o, k, s, p, bias=False)
        self.bn = nn.BatchNorm2d(o, eps=0.001)

    def forward(self, x) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class _IncA(nn.Module):
    def __init__(self, i, pool) -> None:
        super().__init__()
        self.b1 = _C(i, 64, 1)
        self.b5 = nn.Sequential(_C(i, 48, 1), _C(48, 64, 5, p=2))
        self.b3 = nn.Sequential(_C(i, 64, 1), _C(64, 96, 3, p=1), _C(96, 96, 3, p=1))
        self.bp = _C(i, pool, 1)

    def forward(self, x) -> torch.Tensor:
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), p], 1)


class _IncB(nn.Module):
    def __init__(self, i) -> None:
        super().__init__()
        self.b3 = _C(i, 384, 3, 2)
        self.bd = nn.Sequential(_C(i, 64, 1), _C(64, 96, 3, p=1), _C(96, 96, 3, 2))

    def forward(self, x) -> torch.Tensor:
        return torch.cat([self.b3(x), self.bd(x), F.max_pool2d(x, 3, 2)], 1)


class _IncC(nn.Module):
    def __init__(self, i, c7) -> None:
        super().__init__()
        self.b1 = _C(i, 192, 1)
        self.b7 = nn.Sequential(_C(i, c7, 1), _C(c7, c7, (1, 7), p=(0, 3)),
                                _C(c7, 192, (7, 1), p=(3, 0)))
        self.bd = nn.Sequential(_C(i, c7, 1), _C(c7, c7, (7, 1), p=(3, 0)),
                                _C(c7, c7, (1, 7), p=(0, 3)), _C(c7, c7, (7, 1), p=(3, 0)),
                                _C(c7, 192, (1, 7), p=(0, 3)))
        self.bp = _C(i, 192, 1)

    def forward(self, x) -> torch.Tensor:
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), p], 1)


class _IncD(nn.Module):
    def __init__(self, i) -> None:
        super().__init__()
        self.b3 = nn.Sequential(_C(i, 192, 1), _C(192, 320, 3, 2))
        self.b7 = nn.Sequential(_C(i, 192, 1), _C(192, 192, (1, 7), p=(0, 3)),
                                _C(192, 192, (7, 1), p=(3, 0)), _C(192, 192, 3, 2))

    def forward(self, x) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class _IncE(nn.Module):
    def __init__(self, i) -> None:
        super().__init__()
        self.b1 = _C(i, 320, 1)
        self.b3_1 = _C(i, 384, 1)
        self.b3_2a = _C(384, 384, (1, 3), p=(0, 1))
        self.b3_2b = _C(384, 384, (3, 1), p=(1, 0))
        self.bd_1 = _C(i, 448, 1)
        self.bd_2 = _C(448, 384, 3, p=1)
        self.bd_3a = _C(384, 384, (1, 3), p=(0, 1))
        self.bd_3b = _C(384, 384, (3, 1), p=(1, 0))
        self.bp = _C(i, 192, 1)

    def forward(self, x) -> torch.Tensor:
        a = self.b3_1(x)
        a = torch.cat([self.b3_2a(a), self.b3_2b(a)], 1)
        d = self.bd_2(self.bd_1(x))
        d = torch.cat([self.bd_3a(d), self.bd_3b(d)], 1)
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), a, d, p], 1)


class _IncAux(nn.Module):
    def __init__(self, i, num_classes) -> None:
        super().__init__()
        self.conv0 = _C(i, 128, 1)
        self.conv1 = _C(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x) -> torch.Tensor:
        # avg_pool2d(5, stride 3) turns the 17x17 maps of a 299-px image into 5x5; the
        # adaptive pool gives the same 5x5 at every image size (smaller images in tests).
        x = self.conv1(self.conv0(F.adaptive_avg_pool2d(x, 5)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InceptionV3(nn.Module):
    def __init__(self, num_classes=1000, aux_logits=True) -> None:
        super().__init__()
        self.stem = nn.Sequential(_C(3, 32, 3, 2), _C(32, 32, 3), _C(32, 64, 3, p=1),
                                  nn.MaxPool2d(3, 2), _C(64, 80, 1), _C(80, 192, 3),
                                  nn.MaxPool2d(3, 2))
        self.mixed5 = nn.Sequential(_IncA(192, 32), _IncA(256, 64), _IncA(288, 64))
        self.mixed6 = nn.Sequential(_IncB(288), _IncC(768, 128), _IncC(768, 160),
                                    _IncC(768, 160), _IncC(768, 192))
        self.aux = _IncAux(768, num_classes) if aux_logits else None
        self.mixed7 = nn.Sequential(_IncD(768), _IncE(1280), _IncE(2048))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x) -> Any:
        x = self.mixed6(self.mixed5(self.stem(x)))
        aux = self.aux(x) if self.aux is not None and self.training else None
        x = self.mixed7(x)
        x = self.fc(self.dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))
        return x if aux is None else (x, aux)


# -- U-Net (Ronneberger et al. 2015, padded convs + batch norm) --------------------------------
def _double(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                         nn.ReLU(inplace=True), nn.Conv2d(o, o, 3, padding=1, bias=False),
                         nn.BatchNorm2d(o), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, in_ch=3, num_classes=2, base=64) -> None:
        super().__init__()
        ch = [base * 2 ** i for i in range(5)]  # 64 .. 1024
        self.downs = nn.ModuleList([_double(in_ch, ch[0])] +
                                   [_double(ch[i], ch[i + 1]) for i in range(4)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(ch[i + 1], ch[i], 2, 2)
                                  for i in reversed(range(4))])
        self.convs = nn.ModuleList([_double(ch[i] * 2, ch[i]) for i in reversed(range(4))])
        self.head = nn.Conv2d(ch[0], num_classes, 1)

    def forward(self, x) -> torch.Tensor:
        skips = []
        for i, d in enumerate(self.downs):
            x = d(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        x = skips.pop()
        for up, conv in zip(self.ups, self.convs):
            x = conv(torch.cat([skips.pop(), up(x)], 1))
        return self.head(x)


# -- ViT-B/16 (Dosovitskiy et al. 2021) ----------------------------------------------------------
class _ViTBlock(nn.Module):
    def __init__(self, d, heads, mlp, dropout=0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.fc1 = nn.Linear(d, mlp)
        self.fc2 = nn.Linear(mlp, d)
        self.heads = heads
        self.drop = nn.Dropout(dropout)

    def forward(self, x) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        a = _attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, n, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class ViT(nn.Module):
    def __init__(self, image=224, patch=16, d=768, depth=12, heads=12, mlp=3072,
                 num_classes=1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d))
        self.blocks = nn.Sequential(*[_ViTBlock(d, heads, mlp) for _ in range(depth)])
        self.ln = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, num_classes)

    def forward(self, x) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.ln(self.blocks(x))[:, 0])
